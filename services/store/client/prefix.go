package client

// PrefixEnd returns the range end that selects every key with prefix p in
// a Range or Watch (from p up to the first key after all of them).
func PrefixEnd(p string) []byte {
	end := []byte(p)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return []byte{0} // every key >= p
}
