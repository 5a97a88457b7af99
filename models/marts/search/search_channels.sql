with

messages as (

    select
        workspace_id,
        channel_id,
        channel_name,
        conversation_type,
        ts_us
    from {{ ref('search_documents') }}
    where is_active and document_kind = 'message'

),

channels as (

    select
        workspace_id || ':' || channel_id as channel_key,
        workspace_id,
        channel_id,
        arg_max(channel_name, ts_us) as channel_name,
        arg_max(conversation_type, ts_us) as conversation_type,
        count(*) as count_messages,
        min(ts_us) as first_ts_us,
        max(ts_us) as last_ts_us
    from messages
    group by 1, 2, 3

)

select * from channels
