{#
    The expensive step (regular expressions over every text), so incremental:
    a run re-normalises only messages that are new, whose payload_hash changed,
    or that mention a user or channel renamed since the previous run.
#}
{{
    config(
        materialized='incremental',
        unique_key='message_id',
        incremental_strategy='delete+insert',
        on_schema_change='fail'
    )
}}

with

messages as (

    select
        message_id,
        workspace_id,
        text,
        search_text,
        payload_hash
    from {{ ref('stg_slack__messages') }}
    where is_content

),

users as (

    select
        workspace_id,
        user_id,
        user_name,
        last_changed_at
    from {{ ref('stg_slack__users') }}

),

channels as (

    select
        workspace_id,
        channel_id,
        channel_name,
        conversation_type,
        last_changed_at
    from {{ ref('stg_slack__channels') }}

),

names_watermark as (

    select
        greatest(
            (select max(users.last_changed_at) from users),
            (select max(channels.last_changed_at) from channels)
        ) as names_changed_at

),

{% if is_incremental() %}

    previous as (

        select
            message_id,
            payload_hash,
            mentioned_ids,
            names_changed_at
        from {{ this }}

    ),

    renamed_entities as (

        select list(users.user_id) as entity_ids
        from users
        where
            users.last_changed_at > (
                select max(previous.names_changed_at) from previous
            )

        union all

        select list(channels.channel_id) as entity_ids
        from channels
        where channels.last_changed_at > (
            select max(previous.names_changed_at) from previous
        )

    ),

    renamed_ids as (

        select flatten(list(renamed_entities.entity_ids)) as entity_ids
        from renamed_entities

    ),

    messages_to_normalize as (

        select
            messages.message_id,
            messages.workspace_id,
            messages.text,
            messages.search_text,
            messages.payload_hash
        from messages
        left join previous
            on messages.message_id = previous.message_id
        where
            previous.message_id is null
            or previous.payload_hash is distinct from messages.payload_hash
            or list_has_any(
                previous.mentioned_ids,
                (select renamed_ids.entity_ids from renamed_ids)
            )

    ),

{% else %}

    messages_to_normalize as (

        select
            message_id,
            workspace_id,
            text,
            search_text,
            payload_hash
        from messages

    ),

{% endif %}

messages_with_mentions as (

    select
        message_id,
        workspace_id,
        payload_hash,
        coalesce(nullif(trim(text), ''), search_text) as display_source,
        search_text,
        {{ slack_mentioned_ids("concat_ws(' ', text, search_text)", '@') }}
            as mentioned_user_ids,
        {{ slack_mentioned_ids("concat_ws(' ', text, search_text)", '#') }}
            as mentioned_channel_ids,
        {{ slack_entity_ids("concat_ws(' ', text, search_text)") }}
            as mentioned_ids
    from messages_to_normalize

),

user_mentions as (

    select
        message_id,
        workspace_id,
        unnest(mentioned_user_ids) as user_id
    from messages_with_mentions
    where len(mentioned_user_ids) > 0

),

user_mentions_named as (

    select
        user_mentions.message_id,
        map_from_entries(
            list(struct_pack(k := users.user_id, v := users.user_name))
        ) as user_names
    from user_mentions
    inner join users
        on
            user_mentions.workspace_id = users.workspace_id
            and user_mentions.user_id = users.user_id
    group by 1

),

channel_mentions as (

    select
        message_id,
        workspace_id,
        unnest(mentioned_channel_ids) as channel_id
    from messages_with_mentions
    where len(mentioned_channel_ids) > 0

),

{# A rendered text is the same for every reader, so only a public channel's
    name goes into it (its current one, as Slack shows it); a private channel
    or DM stays its id, label or not, since a reader who may see this message
    may not be one of its members, and so does a channel missing here (the
    entity macro never falls back to the label: it may name a private channel
    the archive never read). #}
channel_mentions_named as (

    select
        channel_mentions.message_id,
        map_from_entries(
            list(
                struct_pack(
                    k := channels.channel_id,
                    v := case
                        when channels.conversation_type = 'public'
                            then channels.channel_name
                        else channels.channel_id
                    end
                )
            )
        ) as channel_names
    from channel_mentions
    inner join channels
        on
            channel_mentions.workspace_id = channels.workspace_id
            and channel_mentions.channel_id = channels.channel_id
    group by 1

),

{# Materialized: the renderer's lambdas capture the name maps, and DuckDB
    runs them with less CPU over flat, materialized rows than over a join's
    output (sliced vectors). #}
messages_joined_to_names as materialized (

    select
        messages_with_mentions.message_id,
        messages_with_mentions.payload_hash,
        messages_with_mentions.display_source,
        messages_with_mentions.search_text,
        messages_with_mentions.mentioned_ids,
        user_mentions_named.user_names,
        channel_mentions_named.channel_names
    from messages_with_mentions
    left join user_mentions_named
        on messages_with_mentions.message_id = user_mentions_named.message_id
    left join channel_mentions_named
        on messages_with_mentions.message_id = channel_mentions_named.message_id

),

messages_rendered as (

    select
        message_id,
        payload_hash,
        mentioned_ids,
        {{
            slack_mrkdwn_to_text('display_source', 'user_names', 'channel_names')
        }} as text_display,
        case
            when search_text is not null and search_text <> display_source
                then {{
                    slack_mrkdwn_to_text(
                        'search_text', 'user_names', 'channel_names'
                    )
                }}
        end as search_text_rendered
    from messages_joined_to_names

),

messages_normalized as (

    select
        messages_rendered.message_id,
        messages_rendered.payload_hash,
        messages_rendered.text_display,
        concat_ws(
            ' ',
            coalesce(
                messages_rendered.search_text_rendered,
                messages_rendered.text_display
            ),
            nullif(array_to_string(messages_rendered.mentioned_ids, ' '), '')
        ) as text_lexical,
        messages_rendered.mentioned_ids,
        names_watermark.names_changed_at
    from messages_rendered
    cross join names_watermark

)

select * from messages_normalized
