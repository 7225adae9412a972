"""Matrix HTML pieces under the renderer: escaping, Markdown, previews, threads, forms. Pure."""
