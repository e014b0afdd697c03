"""`retrain tree`: the experiment tree."""
