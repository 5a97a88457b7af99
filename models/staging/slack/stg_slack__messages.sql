with

source as (

    select * from {{ source('slack', 'messages') }}

),

renamed as (

    select

        ----------  ids
        message_key as message_id,
        workspace_id,
        channel_id,
        user_id,
        bot_id,
        source_message_id,

        ---------- strings
        ts,
        thread_ts,
        edited_ts,
        subtype,
        username as bot_username,
        -- A NUL ends DuckDB's full-text tokenizer: the words after it
        -- went unindexed. `text` is the source's name for the column.
        replace(text, chr(0), ' ') as text,  -- noqa: RF04
        replace(search_text, chr(0), ' ') as search_text,
        payload_hash,
        reactions,
        file_ids,

        ---------- numerics
        ts_us,
        reply_count,

        ---------- booleans
        is_thread_parent,
        is_thread_reply,
        is_thread_broadcast,
        is_edited,
        is_deleted,
        is_bot,
        coalesce(subtype, '') not in (
            {%- for subtype in var('non_content_subtypes') %}
                '{{ subtype }}'{{ "," if not loop.last }}
            {%- endfor %}
        ) as is_content,

        ---------- dates
        conversation_day as conversation_date,

        ---------- timestamps
        make_timestamptz(ts_us) as posted_at,
        last_changed_at

    from source

)

select * from renamed
