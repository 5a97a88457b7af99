{#
    Not served. A few documents holding the identifiers users search for
    verbatim, indexed with the project's FTS configuration by the same macro
    the artifact build calls; data-tests/marts/search check that each
    identifier finds its document. A tokenizer setting that drops digits
    fails `dbt build` here.
#}
{{
    config(
        materialized='table',
        post_hook="{{ build_fts_index(this, 'document_id', 'text_lexical') }}"
    )
}}

with

canaries as (

    select
        canary_rows.document_id,
        canary_rows.text_lexical,
        canary_rows.search_query
    from (
        values
        ('sqlstate', 'login failed: SQLSTATE 28P01 for app', '28P01'),
        ('error_code', 'build broke with ERR-42 again', 'ERR-42'),
        ('version', 'shipped v2.3.1 to production', 'v2.3.1'),
        ('user_id', 'ping @Annie U024BE7LH about it', 'U024BE7LH'),
        ('accents', 'Zoë left for the café', 'cafe zoe'),
        ('cyrillic', 'Привет, база данных упала', 'привет'),
        ('cjk', '数据库 恢复 了', '数据库')
    ) as canary_rows (document_id, text_lexical, search_query)

)

select * from canaries
