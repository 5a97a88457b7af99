{#
    Slack mrkdwn -> readable text, in one SQL expression.

    The text is cut into code spans (kept verbatim) and other runs. Other runs
    are cut again into `<...>` entities and plain text; each entity is rendered
    by slack_render_entity, then formatting markers are stripped from the run.
    The three HTML escapes are undone last, so an escaped `&lt;@U1&gt;` never
    turns into a mention.
#}
{% macro slack_mrkdwn_to_text(text, user_names, channel_names) -%}
    {{ slack_unescape_html(
        "array_to_string(list_transform(regexp_extract_all(coalesce("
        ~ text
        ~ ", ''), '(?s)```.*?```|`[^`\\n]*`|[^`]+|`'), code_or_run -> "
        ~ "case when code_or_run[1] = '`' then code_or_run else "
        ~ slack_strip_formatting(
            "array_to_string(list_transform(regexp_extract_all(code_or_run, "
            ~ "'<[^<>]*>|[^<]+|<'), entity_or_text -> "
            ~ slack_render_entity('entity_or_text', user_names, channel_names)
            ~ "), '')"
        )
        ~ " end), '')"
    ) }}
{%- endmacro %}
