package pipelines.flink;

import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.ByteArrayInputStream;
import java.nio.charset.StandardCharsets;
import org.apache.flink.kafka.shaded.org.apache.kafka.common.header.Header;
import org.apache.flink.kafka.shaded.org.apache.kafka.common.header.Headers;
import org.apache.flink.kafka.shaded.org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.flink.kafka.shaded.org.apache.kafka.common.header.internals.RecordHeaders;

/**
 * A record's headers as one byte array and back, in order, repeated keys and null values
 * kept: per header a 4-byte key length, the key (UTF-8), a 4-byte value length (-1: null)
 * and the value. Null stands for no headers.
 */
final class HeaderBytes {
    private HeaderBytes() {}

    static byte[] encode(Headers headers) {
        if (headers == null || !headers.iterator().hasNext()) {
            return null;
        }
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        try (DataOutputStream out = new DataOutputStream(bytes)) {
            for (Header header : headers) {
                byte[] key = header.key().getBytes(StandardCharsets.UTF_8);
                out.writeInt(key.length);
                out.write(key);
                byte[] value = header.value();
                out.writeInt(value == null ? -1 : value.length);
                if (value != null) {
                    out.write(value);
                }
            }
        } catch (IOException e) {
            throw new IllegalStateException(e);  // a ByteArrayOutputStream does not fail
        }
        return bytes.toByteArray();
    }

    static Headers decode(byte[] encoded) {
        Headers headers = new RecordHeaders();
        if (encoded == null) {
            return headers;
        }
        try (DataInputStream in = new DataInputStream(new ByteArrayInputStream(encoded))) {
            while (in.available() > 0) {
                byte[] key = new byte[in.readInt()];
                in.readFully(key);
                int length = in.readInt();
                byte[] value = null;
                if (length >= 0) {
                    value = new byte[length];
                    in.readFully(value);
                }
                headers.add(new RecordHeader(new String(key, StandardCharsets.UTF_8), value));
            }
        } catch (IOException e) {
            throw new IllegalStateException("headers not written by HeaderBytes.encode", e);
        }
        return headers;
    }
}
