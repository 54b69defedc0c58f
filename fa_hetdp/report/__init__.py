"""Tables (text, CSV, Markdown) and plots of results."""
