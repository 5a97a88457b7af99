{#
    Removes *bold*, _italic_ and ~strike~ markers and a leading `> ` quote
    marker (still escaped as `&gt;` here), keeping the words. As in Slack, a
    marker pair sits on word boundaries around text that starts and ends with
    no space: snake_case and :white_check_mark: keep their underscores, `2*3*4`
    and `*bold*s` their stars, and `rm ~/tmp and ~/cache`, `*.pyc and *.tmp`
    and `a * b * c` (a marker beside a space) stay as written. RE2 has no
    lookahead: `\B` after a closing star or tilde says the next character is
    no word character, without taking it from the next match.
#}
{% macro slack_strip_formatting(text) -%}
    regexp_replace(
        regexp_replace(
            regexp_replace(
                regexp_replace(
                    {{ text }},
                    '(^|[^\w*])\*([^*\s]|[^*\s][^*\n]*[^*\s])\*\B', '\1\2', 'g'
                ),
                '\b_([^_\s]|[^_\s][^_\n]*[^_\s])_\b', '\1', 'g'
            ),
            '(^|[^\w~])~([^~\s]|[^~\s][^~\n]*[^~\s])~\B', '\1\2', 'g'
        ),
        '(?m)^&gt; ?', '', 'g'
    )
{%- endmacro %}
