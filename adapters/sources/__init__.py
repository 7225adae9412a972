"""One module per upstream system: parse and validate in, write the answer back out."""
