"""Developer tools: regenerate the SDK's semantic conventions, and the README's pictures."""
