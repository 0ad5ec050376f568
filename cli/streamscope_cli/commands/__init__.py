"""One module per `streamscope` subcommand, so each can be imported and tested on its own."""
