{#
    Undoes the only three escapes Slack applies. `&amp;` goes last so that an
    escaped escape (`&amp;lt;`) becomes the literal text `&lt;`.
#}
{% macro slack_unescape_html(text) -%}
    replace(replace(replace({{ text }}, '&lt;', '<'), '&gt;', '>'), '&amp;', '&')
{%- endmacro %}
