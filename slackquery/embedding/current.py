"""What "the current vector of a document" means, as SQL over the state database.

A document wants a vector when it is an active message (thread context documents are not
embedded). Its current work item in a generation is the one at the document's current
`text_hash`; its current vector is that item once it has succeeded. Items at older
hashes stay as history and never count. The work queue, coverage reports, the build's
coverage gate and the artifact's vectors all read these fragments, so the rule has one
home. It is not a dbt view: the embedding tables belong to the embed flow and do not
exist when dbt first runs, and the projection must not read another writer's tables.

Fragments bind `$generation_id`; use them as subqueries.
"""

WANTED_DOCUMENTS = """
    select document_id, text_hash, text_embedding
    from search_documents
    where document_kind = 'message' and is_active
"""

# Every column of the work item, its row id (`work_row`) and the text to embed.
CURRENT_ITEMS = f"""
    select items.rowid as work_row, items.*, wanted.text_embedding
    from embedding_work_items as items
    inner join ({WANTED_DOCUMENTS}) as wanted
        on wanted.document_id = items.document_id and wanted.text_hash = items.text_hash
    where items.generation_id = $generation_id
"""

CURRENT_VECTORS = f"""
    select work_row, document_id, embedding
    from ({CURRENT_ITEMS}) as current_items
    where state = 'succeeded'
"""
