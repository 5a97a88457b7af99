with

messages as (

    select
        message_id,
        workspace_id,
        channel_id,
        user_id,
        bot_id,
        bot_username,
        source_message_id,
        ts,
        thread_ts,
        ts_us,
        posted_at,
        subtype,
        edited_ts,
        reply_count,
        reactions,
        file_ids,
        is_thread_parent,
        is_thread_reply,
        is_thread_broadcast,
        is_edited,
        is_deleted,
        is_bot
    from {{ ref('stg_slack__messages') }}
    where is_content

),

messages_normalized as (

    select
        message_id,
        payload_hash,
        text_display,
        text_lexical,
        mentioned_ids
    from {{ ref('int_messages__normalized') }}

),

users as (

    select
        workspace_id,
        user_id,
        user_name
    from {{ ref('stg_slack__users') }}

),

messages_with_thread_ids as (

    select
        *,
        case
            when thread_ts is not null or is_thread_parent
                then
                    workspace_id || ':' || channel_id || ':'
                    || coalesce(thread_ts, ts)
        end as thread_id
    from messages

),

messages_joined_to_roots as (

    select
        messages_with_thread_ids.*,
        roots.message_id as root_message_id
    from messages_with_thread_ids
    left join messages as roots
        on messages_with_thread_ids.thread_id = roots.message_id

),

messages_joined_to_text as (

    select
        messages_joined_to_roots.message_id,
        messages_joined_to_roots.workspace_id,
        messages_joined_to_roots.channel_id,
        messages_joined_to_roots.source_message_id,
        messages_joined_to_roots.ts,
        messages_joined_to_roots.thread_ts,
        messages_joined_to_roots.ts_us,
        messages_joined_to_roots.posted_at,
        messages_joined_to_roots.thread_id,
        messages_joined_to_roots.subtype,
        messages_joined_to_roots.edited_ts,
        messages_joined_to_roots.reply_count,
        messages_joined_to_roots.reactions,
        messages_joined_to_roots.file_ids,
        messages_joined_to_roots.is_thread_parent,
        messages_joined_to_roots.is_thread_reply,
        messages_joined_to_roots.is_thread_broadcast,
        messages_joined_to_roots.is_edited,
        messages_joined_to_roots.is_deleted,
        messages_joined_to_roots.is_bot,
        messages_normalized.payload_hash,
        messages_normalized.text_display,
        messages_normalized.text_lexical,
        messages_normalized.mentioned_ids,
        coalesce(
            messages_joined_to_roots.user_id, messages_joined_to_roots.bot_id
        ) as author_id,
        coalesce(
            users.user_name,
            nullif(trim(messages_joined_to_roots.bot_username), ''),
            messages_joined_to_roots.user_id,
            messages_joined_to_roots.bot_id,
            'unknown'
        ) as author_name,
        coalesce(
            messages_joined_to_roots.root_message_id,
            messages_joined_to_roots.message_id
        ) as thread_root_id,
        not messages_joined_to_roots.is_deleted
        and coalesce(messages_joined_to_roots.subtype, '') <> 'tombstone'
        and trim(messages_normalized.text_display) <> '' as is_active
    from messages_joined_to_roots
    inner join messages_normalized
        on messages_joined_to_roots.message_id = messages_normalized.message_id
    left join users
        on
            messages_joined_to_roots.workspace_id = users.workspace_id
            and coalesce(
                messages_joined_to_roots.user_id,
                messages_joined_to_roots.bot_id
            ) = users.user_id

)

select * from messages_joined_to_text
