with

channels as (

    select
        channel_key,
        workspace_id,
        channel_id,
        conversation_type,
        member_ids
    from {{ ref('stg_slack__channels') }}
    where member_ids is not null

),

users as (

    select
        workspace_id,
        user_id
    from {{ ref('stg_slack__users') }}

),

members_unnested as (

    select
        channels.channel_key || ':' || member.user_id as channel_member_key,
        channels.workspace_id,
        channels.channel_id,
        channels.conversation_type,
        member.user_id
    from channels
    cross join unnest(channels.member_ids) as member (user_id)

),

user_workspaces as (

    select
        user_id,
        list(distinct workspace_id) as workspace_ids
    from users
    group by 1

),

members_classified as (

    select
        members_unnested.channel_member_key,
        members_unnested.workspace_id,
        members_unnested.channel_id,
        members_unnested.conversation_type,
        members_unnested.user_id,
        coalesce(
            list_contains(
                user_workspaces.workspace_ids, members_unnested.workspace_id
            ),
            false
        ) as is_workspace_user,
        coalesce(
            not list_contains(
                user_workspaces.workspace_ids, members_unnested.workspace_id
            ),
            false
        ) as is_external
    from members_unnested
    left join user_workspaces
        on members_unnested.user_id = user_workspaces.user_id

)

select * from members_classified
