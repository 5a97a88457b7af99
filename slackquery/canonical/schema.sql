-- Canonical Slack store, "Slackpipe" schema version 2 plus Slackquery's additions.
-- Written only by `slackquery import`; everything downstream attaches it READ_ONLY.
-- Documented column by column in docs/canonical-schema.md.

create table if not exists schema_metadata (
    schema_version integer not null,
    installed_at timestamptz not null
);

create table if not exists import_runs (
    run_id varchar primary key,
    workspace_id varchar,
    source_path varchar not null,
    source_format varchar not null,   -- slack_export | slackdump_export | beacon_jsonl
    started_at timestamptz not null,
    completed_at timestamptz,
    status varchar not null,          -- succeeded (failed runs roll back and leave no row)
    counts_json json,                 -- inserted / updated / unchanged / tombstoned / skipped
    warnings_json json                -- [{file, problem}] for skipped items
);

create table if not exists workspaces (
    workspace_id varchar primary key,  -- Slack team id (T…), or a slug for non-Slack sources
    workspace_slug varchar not null,   -- subdomain: <slug>.slack.com
    team_name varchar not null,
    workspace_url varchar not null,    -- https://<slug>.slack.com
    source_format varchar not null,
    latest_run_id varchar not null,
    last_changed_at timestamptz not null
);

create table if not exists channels (
    workspace_id varchar not null,
    channel_id varchar not null,       -- C… / G… / D… / mpim id
    name varchar not null,             -- channel name; DM: the other member's handle
    conversation_type varchar not null, -- public_channel | private_channel | im | mpim
    is_archived boolean not null,
    is_general boolean not null,
    created_at timestamptz,
    creator_id varchar,
    topic varchar,
    purpose varchar,
    member_ids varchar[],
    export_folder varchar not null,    -- folder name inside the export
    raw_json json,
    payload_hash varchar not null,
    latest_run_id varchar not null,
    last_changed_at timestamptz not null,
    primary key (workspace_id, channel_id)
);

create table if not exists users (
    workspace_id varchar not null,
    user_id varchar not null,          -- U… / W… / B… (bots without a user)
    username varchar,                  -- handle (`name`)
    real_name varchar,
    display_name varchar,
    title varchar,
    tz varchar,
    is_bot boolean not null,
    is_deleted boolean not null,
    is_admin boolean not null,
    raw_json json,
    payload_hash varchar not null,
    latest_run_id varchar not null,
    last_changed_at timestamptz not null,
    primary key (workspace_id, user_id)
);

create table if not exists messages (
    message_key varchar primary key,   -- workspace_id:channel_id:ts
    workspace_id varchar not null,
    channel_id varchar not null,
    ts varchar not null,               -- Slack ts, canonical form, unique per conversation
    ts_us bigint not null,             -- ts converted exactly (string split) to microseconds
    user_id varchar,                   -- author; bots: bot user id if known
    bot_id varchar,
    username varchar,                  -- bot/app display name carried on the message
    subtype varchar,                   -- null for ordinary posts
    text varchar,                      -- raw mrkdwn as exported
    search_text varchar,               -- text plus attachment/file titles, not normalised
    thread_ts varchar,
    is_thread_parent boolean not null,
    is_thread_reply boolean not null,
    is_thread_broadcast boolean not null,
    reply_count integer,
    is_edited boolean not null,
    edited_ts varchar,
    is_deleted boolean not null,       -- tombstone: vanished from a re-exported day, or subtype tombstone
    is_bot boolean not null,
    reactions json,                    -- [{name, count, users}]
    file_ids varchar[],
    source_message_id varchar not null, -- id in the source format (message_key for exports,
                                        -- synthetic:<channel>:<local_id> for beacon jsonl)
    conversation_day date not null,    -- the day file it came from (drives tombstoning)
    raw_json json,
    payload_hash varchar not null,     -- sha256 of the canonical message JSON
    first_seen_run_id varchar not null,
    latest_run_id varchar not null,
    last_changed_at timestamptz not null
);

create table if not exists files (
    workspace_id varchar not null,
    file_id varchar not null,
    message_key varchar,
    channel_id varchar,
    message_ts varchar,
    name varchar,
    title varchar,
    mimetype varchar,
    size bigint,
    local_object_path varchar,         -- path inside the export (slackdump layouts), else null
    url_private varchar,
    is_deleted boolean not null,
    payload_hash varchar not null,
    latest_run_id varchar not null,
    last_changed_at timestamptz not null,
    primary key (workspace_id, file_id)
);

-- Written by `slackquery sync`, always in the same transaction as the messages they cover,
-- so a killed sync resumes exactly where its last commit left it.
create table if not exists sync_channels (
    workspace_id varchar not null,
    channel_id varchar not null,
    synced_through_ts varchar,         -- history is complete up to this ts (last finished pass)
    pass_oldest_ts varchar,            -- the pass in progress reads (oldest, latest) ...
    pass_latest_ts varchar,
    pass_cursor varchar,               -- ... from this history cursor (null: from the newest)
    pass_history_done boolean,         -- history read; the pass ends once its threads are read
    updated_at timestamptz not null,
    primary key (workspace_id, channel_id)
);

create table if not exists sync_threads (  -- threads whose replies the pass still has to read
    workspace_id varchar not null,
    channel_id varchar not null,
    thread_ts varchar not null,
    reply_cursor varchar,              -- next conversations.replies cursor (null: first page)
    primary key (workspace_id, channel_id, thread_ts)
);

create table if not exists sync_thread_reads (  -- when each thread was last read whole
    workspace_id varchar not null,
    channel_id varchar not null,
    thread_ts varchar not null,
    read_at timestamptz not null,      -- the sweep of quiet threads reads the oldest first
    primary key (workspace_id, channel_id, thread_ts)
);

create table if not exists sync_history_sweeps (  -- where each channel's older history is re-read
    workspace_id varchar not null,
    channel_id varchar not null,
    before_ts varchar,                 -- the next sweep page ends here (null: at the re-read window)
    swept_at timestamptz not null,     -- channels are swept least recently swept first
    primary key (workspace_id, channel_id)
);

create table if not exists sync_member_reads (  -- when sync last read each member list
    workspace_id varchar not null,
    channel_id varchar not null,
    read_at timestamptz not null,      -- public channels' lists are re-read oldest first
    primary key (workspace_id, channel_id)
);

create table if not exists sync_seen (  -- what the pass in progress has read so far
    workspace_id varchar not null,
    channel_id varchar not null,
    scope varchar not null,            -- `history`, or the thread_ts of a thread being read
    ts varchar not null,
    primary key (workspace_id, channel_id, scope, ts)
);
