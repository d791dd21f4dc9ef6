package headwater

import (
	"encoding/hex"
	"encoding/json"
	"os"
	"testing"
)

// The vectors every Headwater client checks its partitioner against (Python:
// tests/clients/test_partitioner_vectors.py reads the same file).
type vectorFile struct {
	CRC32C []struct {
		KeyHex string `json:"key_hex"`
		CRC32C uint32 `json:"crc32c"`
	} `json:"crc32c"`
	Partition []struct {
		KeyHex     string `json:"key_hex"`
		Partitions int    `json:"partitions"`
		Partition  int    `json:"partition"`
	} `json:"partition"`
}

func TestPartitionerMatchesTheSharedVectors(t *testing.T) {
	raw, err := os.ReadFile("../partitioner-vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var v vectorFile
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.CRC32C) == 0 || len(v.Partition) == 0 {
		t.Fatalf("no vectors in the file: %d crc32c, %d partition", len(v.CRC32C), len(v.Partition))
	}
	if got := CRC32C([]byte("123456789")); got != 0xE3069283 {
		t.Fatalf("CRC32C check value %#x, want 0xE3069283", got)
	}
	for _, c := range v.CRC32C {
		key, err := hex.DecodeString(c.KeyHex)
		if err != nil {
			t.Fatal(err)
		}
		if got := CRC32C(key); got != c.CRC32C {
			t.Errorf("CRC32C(%s) = %d, want %d", c.KeyHex, got, c.CRC32C)
		}
	}
	for _, p := range v.Partition {
		key, err := hex.DecodeString(p.KeyHex)
		if err != nil {
			t.Fatal(err)
		}
		if got := Partition(key, p.Partitions); got != p.Partition {
			t.Errorf("Partition(%s, %d) = %d, want %d", p.KeyHex, p.Partitions, got, p.Partition)
		}
	}
}
