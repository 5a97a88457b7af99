with

source as (

    select * from {{ source('slack', 'users') }}

),

renamed as (

    select

        ----------  ids
        workspace_id || ':' || user_id as user_key,
        workspace_id,
        user_id,

        ---------- strings
        coalesce(
            nullif(trim(display_name), ''),
            nullif(trim(real_name), ''),
            nullif(trim(username), ''),
            user_id
        ) as user_name,
        username,
        real_name,
        display_name,
        title,
        tz as time_zone,
        payload_hash,

        ---------- booleans
        is_bot,
        is_deleted,
        is_admin,
        {# Slack's multi-channel (is_restricted) and single-channel
            (is_ultra_restricted) guests. #}
        coalesce(try_cast(raw_json ->> 'is_restricted' as boolean), false)
        or coalesce(
            try_cast(raw_json ->> 'is_ultra_restricted' as boolean), false
        ) as is_guest,

        ---------- timestamps
        last_changed_at

    from source

)

select * from renamed
