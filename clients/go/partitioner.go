package headwater

import "hash/crc32"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// CRC32C is the CRC-32C (Castagnoli) of data as an unsigned 32-bit integer;
// CRC32C([]byte("123456789")) == 0xE3069283.
func CRC32C(data []byte) uint32 {
	return crc32.Checksum(data, castagnoli)
}

// Partition is the cross-language key partitioner every Headwater client and the broker's
// records path share (docs/architecture.md; Python: headwater.client.crc32c_partition):
// CRC32C(key) mod partitions. Records with a nil key are not placed by it (the Producer
// spreads them round-robin). clients/partitioner-vectors.json holds the vectors every client's
// tests check.
func Partition(key []byte, partitions int) int {
	return int(CRC32C(key) % uint32(partitions))
}
