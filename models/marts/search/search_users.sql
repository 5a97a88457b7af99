with

members as (

    select
        user_key,
        workspace_id,
        user_id,
        user_name,
        username,
        real_name,
        display_name,
        is_bot,
        is_deleted,
        is_guest
    from {{ ref('stg_slack__users') }}

),

documents as (

    select
        workspace_id,
        author_id,
        author_name,
        ts_us,
        is_bot
    from {{ ref('search_documents') }}
    where is_active and author_id is not null

),

authors as (

    select
        workspace_id,
        author_id as user_id,
        arg_max(author_name, ts_us) as user_name,
        bool_or(is_bot) as is_bot
    from documents
    group by 1, 2

),

{# A bot or an unknown user can author messages without a member record;
    it is still a user a searcher may name. #}
users as (

    select
        coalesce(
            members.user_key, authors.workspace_id || ':' || authors.user_id
        ) as user_key,
        coalesce(members.workspace_id, authors.workspace_id) as workspace_id,
        coalesce(members.user_id, authors.user_id) as user_id,
        coalesce(members.user_name, authors.user_name) as user_name,
        members.username,
        members.real_name,
        members.display_name,
        coalesce(members.is_bot, authors.is_bot) as is_bot,
        members.is_deleted,
        members.is_guest,
        {# What serving lets the account see when it asks: nothing once Slack
            deactivated it; a guest only the conversations it is a member of. #}
        case
            when members.is_deleted then 'deactivated'
            when members.is_guest then 'guest'
        end as account_limit,
        authors.user_id is not null as is_author
    from members
    full outer join authors
        on
            members.workspace_id = authors.workspace_id
            and members.user_id = authors.user_id

)

select * from users
