{#
    Builds (or rebuilds: overwrite=1) the DuckDB full-text index of one table
    with this project's configuration, read from the `fts_config` var so the
    state build, the artifact build and serving agree on one tokenizer.
    DuckDB FTS indexes are static and need a table, so call this after the
    table is complete: as a post_hook, or with `dbt run-operation` (see
    build_artifact_fts_index). `relation` is a Relation or a table name
    (schema `main`).
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
    Builds the FTS index of a table in another DuckDB file, the artifact
    build's candidate, with `dbt run-operation`. The file is a macro argument,
    not the profile's `path`: dbt re-parses the whole project whenever the
    profile changes, so a profile naming each build's file would cost every
    build a full parse. Detaching checkpoints the file and releases it.
#}
{% macro build_artifact_fts_index(
    artifact_path, relation, id_column, text_column
) -%}
    {%- set quoted_path = "'" ~ artifact_path | replace("'", "''") ~ "'" -%}
    {%- do run_query('attach ' ~ quoted_path ~ ' as fts_candidate') -%}
    {%- do run_query('use fts_candidate') -%}
    {%- do build_fts_index(relation, id_column, text_column) -%}
    {%- do run_query('use ' ~ target.database) -%}
    {%- do run_query('detach fts_candidate') -%}
{%- endmacro %}

{#
    Name of the schema DuckDB creates for a table's FTS index, e.g.
    `fts_main_search_documents`; the index's match_bm25 macro lives there.
#}
{% macro fts_schema_name(relation) -%}
    fts_{{ relation.schema }}_{{ relation.identifier }}
{%- endmacro %}
