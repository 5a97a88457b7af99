{#
    Every canary's query must score its own document, and no other document
    may score higher: the FTS configuration keeps digits, version numbers and
    ids as tokens, folds case and accents, and keeps non-Latin scripts.
#}
with

canaries as (

    select
        document_id,
        search_query
    from {{ ref('search_fts_canaries') }}

),

scores as (

    select
        queries.document_id as expected_document_id,
        queries.search_query,
        documents.document_id,
        {{ fts_schema_name(ref('search_fts_canaries')) }}.match_bm25(
            documents.document_id, queries.search_query
        ) as score
    from canaries as queries
    cross join canaries as documents

),

best_hits as (

    select
        expected_document_id,
        search_query,
        arg_max(document_id, score) as best_document_id,
        max(score) as best_score
    from scores
    group by 1, 2

)

select *
from best_hits
where
    best_score is null
    or best_document_id <> expected_document_id
