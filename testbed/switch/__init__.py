"""Switch backends. `pipeline` holds the program interface every soft-switch
pipeline implements; `soft` is the AF_PACKET software switch process."""
