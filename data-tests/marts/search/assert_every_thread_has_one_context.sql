{#
    Every thread that has a message document has exactly one thread context
    document.
#}
with

threads as (

    select distinct thread_id
    from {{ ref('search_documents') }}
    where document_kind = 'message' and thread_id is not null

),

contexts as (

    select
        thread_id,
        count(*) as count_contexts
    from {{ ref('search_documents') }}
    where document_kind = 'thread_context'
    group by 1

),

threads_without_one_context as (

    select
        threads.thread_id,
        coalesce(contexts.count_contexts, 0) as count_contexts
    from threads
    left join contexts
        on threads.thread_id = contexts.thread_id
    where coalesce(contexts.count_contexts, 0) <> 1

)

select * from threads_without_one_context
