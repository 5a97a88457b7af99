{#
    One thread context per thread. Incremental: each run fingerprints every
    thread's members (ids, payload hashes, author names, display text hashes,
    active flags) and renders again only threads whose fingerprint changed, so
    editing one reply re-renders one thread and a deletion (which keeps the
    payload hash) drops the message from its thread context.
#}
{{
    config(
        materialized='incremental',
        unique_key='thread_id',
        incremental_strategy='delete+insert',
        on_schema_change='fail'
    )
}}

{%- set max_messages = var('thread_context_max_messages') -%}
{%- set max_chars = var('thread_context_max_chars') -%}

with

thread_messages as (

    select
        message_id,
        thread_id,
        workspace_id,
        channel_id,
        author_id,
        author_name,
        source_message_id,
        ts,
        thread_ts,
        ts_us,
        posted_at,
        payload_hash,
        text_display,
        mentioned_ids,
        is_active
    from {{ ref('int_messages__threaded') }}
    where thread_id is not null

),

thread_fingerprints as (

    select
        thread_id,
        md5(
            string_agg(
                message_id || '|' || payload_hash || '|' || author_name
                || '|' || md5(text_display) || '|' || is_active::varchar,
                '|'
                order by ts_us, message_id
            )
        ) as members_fingerprint
    from thread_messages
    group by 1

),

{% if is_incremental() %}

    previous as (

        select
            thread_id,
            members_fingerprint
        from {{ this }}

    ),

    threads_to_render as (

        select thread_fingerprints.thread_id
        from thread_fingerprints
        left join previous
            on thread_fingerprints.thread_id = previous.thread_id
        where
            previous.thread_id is null
            or previous.members_fingerprint
            <> thread_fingerprints.members_fingerprint

    ),

{% else %}

    threads_to_render as (

        select thread_id from thread_fingerprints

    ),

{% endif %}

messages_of_threads_to_render as (

    select thread_messages.*
    from thread_messages
    inner join threads_to_render
        on thread_messages.thread_id = threads_to_render.thread_id

),

thread_roots as (

    {#- The root is the message whose ts is the thread's; a thread whose root
        was never exported is headed by its first message instead. -#}
    select
        thread_id,
        message_id as thread_root_id,
        workspace_id,
        channel_id,
        author_id,
        author_name,
        source_message_id,
        ts,
        ts_us,
        posted_at
    from messages_of_threads_to_render
    qualify row_number() over (
        partition by thread_id
        order by ts <> coalesce(thread_ts, ts), ts_us, message_id
    ) = 1

),

blocks as (

    select
        thread_id,
        message_id,
        ts_us,
        payload_hash,
        mentioned_ids,
        '[' || strftime(make_timestamp(ts_us), '%Y-%m-%dT%H:%M:%SZ') || '] '
        || author_name || ': ' || text_display as block
    from messages_of_threads_to_render
    where is_active

),

blocks_numbered as (

    select
        *,
        row_number() over (
            partition by thread_id order by ts_us, message_id
        ) as block_number,
        sum(length(block) + 2) over (
            partition by thread_id
            order by ts_us, message_id
            rows between unbounded preceding and current row
        ) - 2 as length_so_far
    from blocks

),

blocks_capped as (

    select *
    from blocks_numbered
    where
        block_number <= {{ max_messages }}
        and (block_number = 1 or length_so_far <= {{ max_chars }})

),

threads_aggregated as (

    select
        thread_id,
        string_agg(
            block, chr(10) || chr(10) order by block_number
        ) as full_text,
        list(message_id order by block_number) as message_ids,
        list_sort(list_distinct(flatten(list(mentioned_ids))))
            as referenced_ids,
        sha256(
            string_agg(payload_hash, '|' order by block_number)
        ) as payload_hash,
        count(*) as count_included_messages
    from blocks_capped
    group by 1

),

thread_sizes as (

    select
        thread_id,
        count(*) as count_messages,
        count(*) filter (where is_active) as count_active_messages
    from messages_of_threads_to_render
    group by 1

),

threads_rendered as (

    select
        thread_roots.thread_id,
        thread_roots.thread_root_id,
        thread_roots.workspace_id,
        thread_roots.channel_id,
        thread_roots.author_id,
        thread_roots.author_name,
        thread_roots.source_message_id,
        thread_roots.ts,
        thread_roots.ts_us,
        thread_roots.posted_at,
        coalesce(
            left(threads_aggregated.full_text, {{ max_chars }}), ''
        ) as rendered_text,
        concat_ws(
            ' ',
            left(threads_aggregated.full_text, {{ max_chars }}),
            nullif(
                array_to_string(threads_aggregated.referenced_ids, ' '), ''
            )
        ) as text_lexical,
        sha256(
            coalesce(left(threads_aggregated.full_text, {{ max_chars }}), '')
        ) as text_hash,
        coalesce(threads_aggregated.message_ids, []::varchar[]) as message_ids,
        coalesce(
            threads_aggregated.payload_hash, sha256('')
        ) as payload_hash,
        thread_sizes.count_messages,
        coalesce(
            threads_aggregated.count_included_messages, 0
        ) as count_included_messages,
        coalesce(
            threads_aggregated.count_included_messages, 0
        ) < thread_sizes.count_active_messages
        or coalesce(length(threads_aggregated.full_text), 0) > {{ max_chars }}
            as is_truncated,
        threads_aggregated.thread_id is not null as is_active,
        thread_fingerprints.members_fingerprint
    from thread_roots
    inner join thread_sizes
        on thread_roots.thread_id = thread_sizes.thread_id
    inner join thread_fingerprints
        on thread_roots.thread_id = thread_fingerprints.thread_id
    left join threads_aggregated
        on thread_roots.thread_id = threads_aggregated.thread_id

)

select * from threads_rendered
