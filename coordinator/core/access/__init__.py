"""Access: the limits contract as data, and (later) its enforcement."""
