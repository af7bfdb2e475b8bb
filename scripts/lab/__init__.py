"""The lab: experiments and data-set builders that are not the product (not in the wheel); scripts/ calls them."""
