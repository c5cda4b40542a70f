"""spec + catalog + index -> lock: the candidates, the rules, the pure plan, the joint solve with the extras,
the devel compiler, and the resolver that locks the plan."""
