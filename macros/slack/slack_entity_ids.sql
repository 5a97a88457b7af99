{#
    The raw ids an mrkdwn text refers to: users (`<@U…>`), channels (`<#C…>`)
    and user groups (`<!subteam^S…>`), sorted and without repeats. Lexical
    search uses them so `U024BE7LH` still finds a message whose display text
    shows the name instead.
#}
{% macro slack_entity_ids(text) -%}
    list_sort(list_distinct(regexp_extract_all(
        coalesce({{ text }}, ''), '<(?:@|#|!subteam\^)([A-Z0-9]+)', 1
    )))
{%- endmacro %}

{#
    The ids of one kind of mention (`sigil` '@' for users, '#' for channels),
    sorted and without repeats: what has to be looked up to render names.
#}
{% macro slack_mentioned_ids(text, sigil) -%}
    list_sort(list_distinct(regexp_extract_all(
        coalesce({{ text }}, ''), '<{{ sigil }}([A-Z0-9]+)', 1
    )))
{%- endmacro %}

{# A Slack ts string ("1700000000.000100") as a permalink has it: digits only. #}
{% macro slack_ts_digits(ts) -%}
    replace({{ ts }}, '.', '')
{%- endmacro %}
