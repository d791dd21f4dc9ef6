package dev.headwater.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HexFormat;
import org.junit.jupiter.api.Test;

/** The vectors every Headwater client checks its partitioner against (Python and Go too). */
class PartitionerTest {
  @Test
  void partitionerMatchesTheSharedVectors() throws Exception {
    JsonObject v =
        JsonParser.parseString(Files.readString(Path.of("../partitioner-vectors.json")))
            .getAsJsonObject();
    assertFalse(v.getAsJsonArray("crc32c").isEmpty());
    assertFalse(v.getAsJsonArray("partition").isEmpty());
    assertEquals(0xE3069283L, Partitioner.crc32c("123456789".getBytes()));
    for (JsonElement e : v.getAsJsonArray("crc32c")) {
      JsonObject c = e.getAsJsonObject();
      byte[] key = HexFormat.of().parseHex(c.get("key_hex").getAsString());
      assertEquals(c.get("crc32c").getAsLong(), Partitioner.crc32c(key), c.toString());
    }
    for (JsonElement e : v.getAsJsonArray("partition")) {
      JsonObject p = e.getAsJsonObject();
      byte[] key = HexFormat.of().parseHex(p.get("key_hex").getAsString());
      assertEquals(
          p.get("partition").getAsInt(),
          Partitioner.partition(key, p.get("partitions").getAsInt()),
          p.toString());
    }
  }
}
