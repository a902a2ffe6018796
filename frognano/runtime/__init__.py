"""Model backends behind one protocol (``base.Model``); heavy libraries load only inside each."""
