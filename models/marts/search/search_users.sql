with

users as (

    select
        user_key,
        workspace_id,
        user_id,
        user_name,
        username,
        real_name,
        display_name,
        is_bot,
        is_deleted
    from {{ ref('stg_slack__users') }}

)

select * from users
