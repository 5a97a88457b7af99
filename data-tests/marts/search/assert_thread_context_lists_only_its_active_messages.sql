{#
    Every message a thread context lists is an active message document of the
    same thread, so the contextual retrieval arm can map a hit back to
    messages that can be returned.
#}
with

thread_contexts as (

    select
        document_id,
        thread_id,
        unnest(message_ids) as message_id
    from {{ ref('search_documents') }}
    where document_kind = 'thread_context'

),

messages as (

    select
        document_id,
        thread_id,
        is_active
    from {{ ref('search_documents') }}
    where document_kind = 'message'

),

listed_messages as (

    select
        thread_contexts.document_id,
        thread_contexts.message_id,
        messages.thread_id,
        messages.is_active
    from thread_contexts
    left join messages
        on thread_contexts.message_id = messages.document_id
    where
        messages.document_id is null
        or messages.thread_id is distinct from thread_contexts.thread_id
        or not messages.is_active

)

select * from listed_messages
