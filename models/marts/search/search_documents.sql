{#
    Incremental, unlike the FTS-indexed marts of the house style: this table is
    the state database's projection (1M+ rows), not something searched in
    place. The artifact build copies it and indexes the copy. A run rewrites
    only documents whose inputs changed: payload hash, rendered text, author,
    conversation or workspace names, thread membership.
#}
{{
    config(
        materialized='incremental',
        unique_key='document_id',
        incremental_strategy='delete+insert',
        on_schema_change='fail'
    )
}}

with

messages as (

    select
        message_id,
        workspace_id,
        channel_id,
        author_id,
        author_name,
        source_message_id,
        ts,
        thread_ts,
        ts_us,
        posted_at,
        thread_id,
        thread_root_id,
        subtype,
        edited_ts,
        reply_count,
        reactions,
        is_thread_parent,
        is_thread_reply,
        is_thread_broadcast,
        is_edited,
        is_deleted,
        is_bot,
        payload_hash,
        text_display,
        text_lexical,
        is_active
    from {{ ref('int_messages__threaded') }}

),

threads as (

    select
        thread_id,
        thread_root_id,
        workspace_id,
        channel_id,
        author_id,
        author_name,
        source_message_id,
        ts,
        ts_us,
        posted_at,
        rendered_text,
        text_lexical,
        text_hash,
        message_ids,
        payload_hash,
        count_messages,
        count_included_messages,
        is_truncated,
        is_active
    from {{ ref('int_threads__rendered') }}

),

channels as (

    select
        workspace_id,
        channel_id,
        channel_name,
        conversation_type
    from {{ ref('stg_slack__channels') }}

),

workspaces as (

    select
        workspace_id,
        workspace_name,
        workspace_slug,
        workspace_url
    from {{ ref('stg_slack__workspaces') }}

),

files as (

    select
        message_id,
        file_id,
        file_name,
        file_title,
        mimetype
    from {{ ref('stg_slack__files') }}
    -- A file deleted in Slack is gone from its message: hits do not list it.
    where message_id is not null and not coalesce(is_deleted, false)

),

files_by_message as (

    select
        message_id,
        list(
            struct_pack(
                file_id,
                name := file_name,
                title := file_title,
                mimetype
            )
            order by file_id
        ) as files
    from files
    group by 1

),

{#- Messages and thread contexts are placed in their workspace and
    conversation the same way: `messages_placed`, `threads_placed`. A
    conversation missing from the export keeps its id as name and the type its
    id prefix implies. -#}
{% for relation in ['messages', 'threads'] %}

    {{ relation }}_placed as (

        select
            {{ relation }}.*,
            workspaces.workspace_name,
            workspaces.workspace_slug,
            workspaces.workspace_url,
            coalesce(
                channels.channel_name, {{ relation }}.channel_id
            ) as channel_name,
            coalesce(
                channels.conversation_type,
                {{ conversation_type_from_id(relation ~ '.channel_id') }}
            ) as conversation_type
        from {{ relation }}
        inner join workspaces
            on {{ relation }}.workspace_id = workspaces.workspace_id
        left join channels
            on
                {{ relation }}.workspace_id = channels.workspace_id
                and {{ relation }}.channel_id = channels.channel_id

    ),

{% endfor %}

messages_in_context as (

    {#- A reply's embedding text also names what it answers ("yes, do that"
        alone matches nothing a searcher types). The root joins before the
        incremental comparison, so an edited or deleted root changes its
        replies' text_hash and they are re-embedded. A message whose thread
        root is another message is a reply. Keep is_thread_reply out of this
        ON clause: a condition on the left side only makes DuckDB plan a
        nested loop join. -#}
    select
        messages_placed.*,
        {{ document_embedding_text(
            'messages_placed.channel_name',
            'messages_placed.author_name',
            'messages_placed.text_display',
            'roots.author_name',
            'roots.text_display'
        ) }} as text_embedding
    from messages_placed
    left join messages as roots
        on
            messages_placed.thread_root_id = roots.message_id
            and messages_placed.message_id <> roots.message_id
            and roots.is_active

),

{% if is_incremental() %}

    previous as (

        select
            document_id,
            payload_hash,
            text_hash,
            text_display,
            {#- A digest, so the hash table stays narrow: what BM25 indexes can
                change alone (a mention in attachment text renders anew). -#}
            md5_number(text_lexical) as text_lexical_digest,
            author_name,
            channel_name,
            conversation_type,
            workspace_name,
            workspace_slug,
            workspace_url,
            thread_id,
            thread_root_id,
            is_active
        from {{ this }}

    ),

    {#- Split by kind so each comparison joins the narrow previous rows of its
        kind (the hash table) to the current rows streaming past, instead of
        building a table of every current full row. -#}
    previous_messages as (

        select *
        from previous
        where document_id not like 'thread:%'

    ),

    previous_threads as (

        select *
        from previous
        where document_id like 'thread:%'

    ),

    {# `is distinct from`: a row whose stored value is null (a bug fixed since)
        must be rewritten too, and `<>` with a null is not true. #}
    messages_to_project as (

        select messages_in_context.*
        from messages_in_context
        left join previous_messages
            on messages_in_context.message_id = previous_messages.document_id
        where
            previous_messages.document_id is null
            or previous_messages.payload_hash is distinct from messages_in_context.payload_hash
            or previous_messages.text_hash
            is distinct from sha256(messages_in_context.text_embedding)
            or previous_messages.text_display is distinct from messages_in_context.text_display
            or previous_messages.text_lexical_digest
            is distinct from md5_number(messages_in_context.text_lexical)
            or previous_messages.author_name is distinct from messages_in_context.author_name
            or previous_messages.channel_name is distinct from messages_in_context.channel_name
            or previous_messages.conversation_type
            is distinct from messages_in_context.conversation_type
            or previous_messages.workspace_name
            is distinct from messages_in_context.workspace_name
            or previous_messages.workspace_slug
            is distinct from messages_in_context.workspace_slug
            or previous_messages.workspace_url is distinct from messages_in_context.workspace_url
            or previous_messages.thread_id
            is distinct from messages_in_context.thread_id
            or previous_messages.thread_root_id
            is distinct from messages_in_context.thread_root_id
            or previous_messages.is_active is distinct from messages_in_context.is_active

    ),

    threads_to_project as (

        select threads_placed.*
        from threads_placed
        left join previous_threads
            on 'thread:' || threads_placed.thread_id
            = previous_threads.document_id
        where
            previous_threads.document_id is null
            or previous_threads.text_hash is distinct from threads_placed.text_hash
            or previous_threads.text_lexical_digest
            is distinct from md5_number(threads_placed.text_lexical)
            or previous_threads.payload_hash is distinct from threads_placed.payload_hash
            or previous_threads.author_name is distinct from threads_placed.author_name
            or previous_threads.channel_name is distinct from threads_placed.channel_name
            or previous_threads.conversation_type
            is distinct from threads_placed.conversation_type
            or previous_threads.workspace_name is distinct from threads_placed.workspace_name
            or previous_threads.workspace_slug is distinct from threads_placed.workspace_slug
            or previous_threads.workspace_url is distinct from threads_placed.workspace_url
            or previous_threads.thread_root_id is distinct from threads_placed.thread_root_id
            or previous_threads.is_active is distinct from threads_placed.is_active

    ),

{% else %}

    messages_to_project as (

        select * from messages_in_context

    ),

    threads_to_project as (

        select * from threads_placed

    ),

{% endif %}

message_documents as (

    select
        messages_to_project.message_id as document_id,
        'message' as document_kind,
        messages_to_project.workspace_id,
        messages_to_project.workspace_name,
        messages_to_project.workspace_slug,
        messages_to_project.workspace_url,
        messages_to_project.channel_id,
        messages_to_project.channel_name,
        messages_to_project.conversation_type,
        messages_to_project.author_id,
        messages_to_project.author_name,
        messages_to_project.ts,
        messages_to_project.ts_us,
        messages_to_project.posted_at,
        messages_to_project.thread_id,
        messages_to_project.thread_root_id,
        messages_to_project.is_thread_parent,
        messages_to_project.is_thread_reply,
        messages_to_project.is_thread_broadcast,
        messages_to_project.is_bot,
        messages_to_project.text_display,
        messages_to_project.text_lexical,
        messages_to_project.text_embedding,
        sha256(messages_to_project.text_embedding) as text_hash,
        {{ slack_permalink(
            'messages_to_project.workspace_url',
            'messages_to_project.channel_id',
            'messages_to_project.ts',
            'messages_to_project.thread_ts',
            'messages_to_project.is_thread_reply'
        ) }} as permalink,
        messages_to_project.source_message_id,
        [messages_to_project.message_id] as message_ids,
        json_object(
            'subtype', messages_to_project.subtype,
            'is_edited', messages_to_project.is_edited,
            'edited_ts', messages_to_project.edited_ts,
            'is_deleted', messages_to_project.is_deleted,
            'reply_count', messages_to_project.reply_count,
            'reactions', coalesce(messages_to_project.reactions, '[]'::json)
        ) as metadata_json,
        to_json(files_by_message.files) as files,
        messages_to_project.is_active,
        messages_to_project.payload_hash
    from messages_to_project
    left join files_by_message
        on messages_to_project.message_id = files_by_message.message_id

),

thread_documents as (

    select
        'thread:' || threads_to_project.thread_id as document_id,
        'thread_context' as document_kind,
        threads_to_project.workspace_id,
        threads_to_project.workspace_name,
        threads_to_project.workspace_slug,
        threads_to_project.workspace_url,
        threads_to_project.channel_id,
        threads_to_project.channel_name,
        threads_to_project.conversation_type,
        threads_to_project.author_id,
        threads_to_project.author_name,
        threads_to_project.ts,
        threads_to_project.ts_us,
        threads_to_project.posted_at,
        threads_to_project.thread_id,
        threads_to_project.thread_root_id,
        false as is_thread_parent,
        false as is_thread_reply,
        false as is_thread_broadcast,
        false as is_bot,
        threads_to_project.rendered_text as text_display,
        threads_to_project.text_lexical,
        threads_to_project.rendered_text as text_embedding,
        threads_to_project.text_hash,
        {{ slack_permalink(
            'threads_to_project.workspace_url',
            'threads_to_project.channel_id',
            'threads_to_project.ts',
            'null',
            'false'
        ) }} as permalink,
        threads_to_project.source_message_id,
        threads_to_project.message_ids,
        json_object(
            'count_messages', threads_to_project.count_messages,
            'count_included_messages',
            threads_to_project.count_included_messages,
            'is_truncated', threads_to_project.is_truncated
        ) as metadata_json,
        null::json as files,
        threads_to_project.is_active,
        threads_to_project.payload_hash
    from threads_to_project

),

documents as (

    select * from message_documents
    union all
    select * from thread_documents

),

documents_with_links as (

    select
        documents.*,
        coalesce(
            regexp_matches(documents.text_lexical, 'https?://'), false
        ) as has_link
    from documents

)

select * from documents_with_links
