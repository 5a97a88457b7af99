{#
    Slack's own permalink form: `<workspace_url>/archives/<channel>/p<ts digits>`,
    plus `?thread_ts=<thread_ts>&cid=<channel>` for a thread reply so Slack opens
    the reply inside its thread.
#}
{% macro slack_permalink(workspace_url, channel_id, ts, thread_ts, is_thread_reply) -%}
    {{ workspace_url }} || '/archives/' || {{ channel_id }} || '/p'
    || {{ slack_ts_digits(ts) }}
    || case
        when {{ is_thread_reply }} and {{ thread_ts }} is not null
            then '?thread_ts=' || {{ thread_ts }} || '&cid=' || {{ channel_id }}
        else ''
    end
{%- endmacro %}

{#
    The conversation type Slack's id prefix implies, for a message whose
    conversation row is missing: D… is a DM, G… a private channel (or an old
    group DM), anything else public.
#}
{% macro conversation_type_from_id(channel_id) -%}
    case
        when {{ channel_id }} like 'D%' then 'dm'
        when {{ channel_id }} like 'G%' then 'private'
        else 'public'
    end
{%- endmacro %}

{#
    What gets embedded for a message: a short header naming the conversation
    and the author, then the readable text (`#channel author: text`). A reply
    adds what it answers: ` (in reply to root-author: <first 400 characters of
    the root>)`; null root arguments (not a reply, or the root is deleted) add
    nothing. 400 characters (about 100 tokens) keep the reply's own words the
    larger share of the vector.
#}
{% macro document_embedding_text(
    channel_name, author_name, text_display, root_author_name, root_text_display
) -%}
    '#' || {{ channel_name }} || ' ' || {{ author_name }} || ': ' || {{ text_display }}
    || coalesce(
        ' (in reply to ' || {{ root_author_name }} || ': '
        || left({{ root_text_display }}, 400) || ')',
        ''
    )
{%- endmacro %}
