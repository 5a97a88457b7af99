{% macro record_dbt_invocation() %}
    {#- The on-run-end hook of every `dbt run` or `dbt build` that ran a model against the
        state database: `slackquery project` records the invocation it ran, so a later one
        it did not (a model tried out by hand, then undone) is known, and rebuilt from
        canonical before anything is built from it. -#}
    {%- if execute and target.name == 'state' and flags.WHICH in ('run', 'build') -%}
        {%- set ran_models = results | selectattr('node.resource_type', 'equalto', 'model') | list -%}
        {%- if ran_models -%}
            create table if not exists main.dbt_invocations (
                invocation_id varchar not null,
                command varchar not null,
                run_started_at timestamptz not null
            );
            insert into main.dbt_invocations
            values ('{{ invocation_id }}', '{{ flags.WHICH }}', '{{ run_started_at.isoformat() }}')
        {%- endif -%}
    {%- endif -%}
{% endmacro %}
