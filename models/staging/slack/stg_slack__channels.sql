with

source as (

    select * from {{ source('slack', 'channels') }}

),

renamed as (

    select

        ----------  ids
        workspace_id || ':' || channel_id as channel_key,
        workspace_id,
        channel_id,
        creator_id,

        ---------- strings
        name as channel_name,
        case conversation_type
            when 'public_channel' then 'public'
            when 'private_channel' then 'private'
            when 'im' then 'dm'
            when 'mpim' then 'group_dm'
        end as conversation_type,
        topic,
        purpose,
        payload_hash,
        member_ids,

        ---------- booleans
        is_archived,
        is_general,

        ---------- timestamps
        created_at,
        last_changed_at

    from source

)

select * from renamed
