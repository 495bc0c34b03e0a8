"""Records and parsing: the line format Python stages answer in, JSON on the data path, parsing with dead letters."""
