"""Provider-credential resolvers (`env`, `static_file`, `http`) behind one async interface."""
