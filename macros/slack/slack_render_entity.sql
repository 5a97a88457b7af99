{#
    Renders one piece of a non-code mrkdwn run. Pieces that are not `<...>`
    entities come back unchanged. `<target|label>` entities are rendered by the
    kind of target: user mentions by what the given map holds for them (else
    the label, else the raw id), channel mentions by what the given map holds
    for them, else the raw id (a channel the archive does not know may be
    private, and its label would name it to readers who are not its members),
    broadcasts and user groups as `@name`, dates as their fallback text, links
    as `label (url)`.
#}
{% macro slack_render_entity(piece, user_names, channel_names) -%}
    case
        when {{ piece }}[1] <> '<' or {{ piece }} = '<' then {{ piece }}
        when {{ piece }}[2] = '@'
            then '@' || coalesce(
                {{ user_names }}[{{ slack_entity_target(piece) }}[2:]],
                nullif({{ slack_entity_label(piece) }}, ''),
                {{ slack_entity_target(piece) }}[2:]
            )
        when {{ piece }}[2] = '#'
            then '#' || coalesce(
                {{ channel_names }}[{{ slack_entity_target(piece) }}[2:]],
                {{ slack_entity_target(piece) }}[2:]
            )
        when {{ piece }}[2] = '!' then
            case split_part({{ slack_entity_target(piece) }}[2:], '^', 1)
                when 'here' then '@here'
                when 'channel' then '@channel'
                when 'everyone' then '@everyone'
                when 'subteam' then '@' || ltrim(coalesce(
                    nullif({{ slack_entity_label(piece) }}, ''),
                    split_part({{ slack_entity_target(piece) }}, '^', 2)
                ), '@')
                when 'date' then coalesce(
                    nullif({{ slack_entity_label(piece) }}, ''),
                    strftime(
                        make_timestamp(try_cast(
                            split_part({{ slack_entity_target(piece) }}, '^', 2)
                            as bigint
                        ) * 1000000),
                        '%Y-%m-%d'
                    ),
                    {{ slack_entity_target(piece) }}[2:]
                )
                else coalesce(
                    nullif({{ slack_entity_label(piece) }}, ''),
                    '@' || split_part({{ slack_entity_target(piece) }}[2:], '^', 1)
                )
            end
        when nullif({{ slack_entity_label(piece) }}, '') is not null
            then {{ slack_entity_label(piece) }}
            || ' (' || {{ slack_entity_target(piece) }} || ')'
        else {{ slack_entity_target(piece) }}
    end
{%- endmacro %}

{# `<target|label>` -> target (everything before the first `|`). #}
{% macro slack_entity_target(piece) -%}
    split_part({{ piece }}[2:-2], '|', 1)
{%- endmacro %}

{# `<target|label>` -> label (everything after the first `|`), null without one. #}
{% macro slack_entity_label(piece) -%}
    case
        when strpos({{ piece }}, '|') > 0
            then {{ piece }}[strpos({{ piece }}, '|') + 1:-2]
    end
{%- endmacro %}
