with

source as (

    select * from {{ source('slack', 'files') }}

),

renamed as (

    select

        ----------  ids
        workspace_id || ':' || file_id as file_key,
        workspace_id,
        file_id,
        message_key as message_id,

        ---------- strings
        name as file_name,
        title as file_title,
        mimetype,

        ---------- numerics
        size as size_bytes,

        ---------- booleans
        is_deleted,

        ---------- timestamps
        last_changed_at

    from source

)

select * from renamed
