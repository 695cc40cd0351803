// Package freelist reuses the places of a slice whose elements are named
// by their index: a pointer-free slab, such as the lock table's slots or
// the lease table's leases, that the garbage collector never has to mark.
package freelist

// Take returns the index of a place in *all to fill: the last one freed
// (popped from *free, where the caller pushes the indexes it frees), or
// else a new zero element appended to *all.
func Take[T any](all *[]T, free *[]int32) int32 {
	if n := len(*free); n > 0 {
		i := (*free)[n-1]
		*free = (*free)[:n-1]
		return i
	}
	var zero T
	*all = append(*all, zero)
	return int32(len(*all) - 1)
}
