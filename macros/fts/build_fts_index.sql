{#
    Builds (or rebuilds: overwrite=1) the DuckDB full-text index of one table
    with this project's configuration, read from the `fts_config` var so the
    state build, the artifact build and serving agree on one tokenizer.
    DuckDB FTS indexes are static and need a table, so call this after the
    table is complete: as a post_hook, or with `dbt run-operation` against an
    artifact file. `relation` is a Relation or a table name (schema `main`).
#}
{% macro build_fts_index(relation, id_column, text_column) -%}
    {%- set settings = var('fts_config') -%}
    {%- if relation is string -%}
        {%- set table_name = relation -%}
    {%- else -%}
        {%- set table_name = relation.schema ~ '.' ~ relation.identifier -%}
    {%- endif -%}
    {%- set statement -%}
        pragma create_fts_index(
            '{{ table_name }}', '{{ id_column }}', '{{ text_column }}',
            stemmer = '{{ settings.stemmer }}',
            stopwords = '{{ settings.stopwords }}',
            ignore = '{{ settings.ignore }}',
            strip_accents = {{ settings.strip_accents }},
            lower = {{ settings.lower }},
            overwrite = 1
        )
    {%- endset -%}
    {%- if execute and invocation_args_dict.get('which') == 'run-operation' -%}
        {#- run-operation: no model to hook onto, so run it here. -#}
        {%- do run_query('load fts') -%}
        {%- do run_query(statement) -%}
        {{ log('built FTS index on ' ~ table_name ~ ' with ' ~ tojson(settings), info=True) }}
    {%- else -%}
        {{ statement }}
    {%- endif -%}
{%- endmacro %}

{#
    Name of the schema DuckDB creates for a table's FTS index, e.g.
    `fts_main_search_documents`; the index's match_bm25 macro lives there.
#}
{% macro fts_schema_name(relation) -%}
    fts_{{ relation.schema }}_{{ relation.identifier }}
{%- endmacro %}
