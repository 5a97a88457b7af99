{#
    The models read the layout of the canonical schema version the
    `canonical_schema_version` var names; refuse anything else.
#}
select max(schema_version) as schema_version
from {{ source('slack', 'schema_metadata') }}
having
    max(schema_version)
    is distinct from {{ var('canonical_schema_version') }}
