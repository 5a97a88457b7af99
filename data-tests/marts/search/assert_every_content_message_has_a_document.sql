{#
    Every content message of the canonical store is one message document,
    active or tombstoned: a join or filter that drops messages fails here
    instead of building an artifact that silently lacks them.
#}
with

content_messages as (

    select message_id
    from {{ ref('stg_slack__messages') }}
    where is_content

),

message_documents as (

    select document_id
    from {{ ref('search_documents') }}
    where document_kind = 'message'

),

messages_without_a_document as (

    select content_messages.message_id
    from content_messages
    left join message_documents
        on content_messages.message_id = message_documents.document_id
    where message_documents.document_id is null

)

select * from messages_without_a_document
