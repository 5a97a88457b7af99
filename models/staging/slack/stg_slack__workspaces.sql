with

source as (

    select * from {{ source('slack', 'workspaces') }}

),

renamed as (

    select

        ----------  ids
        workspace_id,

        ---------- strings
        workspace_slug,
        team_name as workspace_name,
        rtrim(workspace_url, '/') as workspace_url,
        source_format,

        ---------- timestamps
        last_changed_at

    from source

)

select * from renamed
