"""One module per destination kind, plus translation between the chat-completions and messages shapes."""
