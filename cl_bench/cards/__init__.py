"""Method and scenario cards: where they come from, how they are read and checked."""
