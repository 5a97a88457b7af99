with

documents as (

    select
        workspace_id,
        workspace_slug,
        workspace_name,
        workspace_url,
        ts_us
    from {{ ref('search_documents') }}
    where is_active

),

workspaces as (

    select
        workspace_id,
        arg_max(workspace_slug, ts_us) as workspace_slug,
        arg_max(workspace_name, ts_us) as workspace_name,
        arg_max(workspace_url, ts_us) as workspace_url
    from documents
    group by 1

)

select * from workspaces
