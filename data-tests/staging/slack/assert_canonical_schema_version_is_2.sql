{#
    The models read the Slackpipe schema version 2 layout; refuse anything
    else.
#}
select max(schema_version) as schema_version
from {{ source('slack', 'schema_metadata') }}
having max(schema_version) is distinct from 2
