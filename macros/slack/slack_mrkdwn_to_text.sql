{#
    Slack mrkdwn -> readable text, in one SQL expression.

    The text is cut into code spans (kept verbatim) and other runs. Other runs
    are cut again into `<...>` entities and plain text; each entity is rendered
    by slack_render_entity, then formatting markers are stripped from the run.
    The three HTML escapes are undone last, so an escaped `&lt;@U1&gt;` never
    turns into a mention.

    This runs over every message, so the common cases take shortcuts that give
    exactly what the general path gives: a text with none of < ` * _ ~ & has
    nothing to render and is returned as it is; a text without a backtick is
    one run, rendered without cutting it into code spans first (DuckDB runs a
    lambda nested in a lambda element by element, which made the general path
    the projection's main cost); a run without `<` holds no entity.
#}
{% macro slack_mrkdwn_to_text(text, user_names, channel_names) -%}
    case
        when not regexp_matches(coalesce({{ text }}, ''), '[<`*_~&]')
            then coalesce({{ text }}, '')
        when not contains({{ text }}, '`')
            then {{ slack_unescape_html(
                slack_render_run(text, user_names, channel_names)
            ) }}
        else {{ slack_unescape_html(
            "array_to_string(list_transform(regexp_extract_all("
            ~ text
            ~ ", '(?s)```.*?```|`[^`\\n]*`|[^`]+|`'), code_or_run -> "
            ~ "case when code_or_run[1] = '`' then code_or_run else "
            ~ slack_render_run('code_or_run', user_names, channel_names)
            ~ " end), '')"
        ) }}
    end
{%- endmacro %}

{#
    One run of mrkdwn outside code spans: its `<...>` entities rendered (when
    it has any), then its formatting markers stripped.
#}
{% macro slack_render_run(run, user_names, channel_names) -%}
    {{ slack_strip_formatting(
        "case when contains(" ~ run ~ ", '<') then "
        ~ "array_to_string(list_transform(regexp_extract_all("
        ~ run
        ~ ", '<[^<>]*>|[^<]+|<'), entity_or_text -> "
        ~ slack_render_entity('entity_or_text', user_names, channel_names)
        ~ "), '') else " ~ run ~ " end"
    ) }}
{%- endmacro %}
