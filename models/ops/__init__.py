"""Operations: retention and what the sweep removes."""
