{#
    Removes *bold*, _italic_ and ~strike~ markers and a leading `> ` quote
    marker (still escaped as `&gt;` here), keeping the words. Underscores
    inside words (snake_case, :white_check_mark:) are left alone because an
    italic marker must sit on a word boundary; `2*3*4` is left alone because a
    bold marker must not follow a word character.
#}
{% macro slack_strip_formatting(text) -%}
    regexp_replace(
        regexp_replace(
            regexp_replace(
                regexp_replace(
                    {{ text }},
                    '(^|[^\w*])\*([^*\n]+)\*', '\1\2', 'g'
                ),
                '\b_([^_\n]+)_\b', '\1', 'g'
            ),
            '(^|[^\w~])~([^~\n]+)~', '\1\2', 'g'
        ),
        '(?m)^&gt; ?', '', 'g'
    )
{%- endmacro %}
