-- The tool's arguments as the RFC 8785 text that was hashed, kept verbatim: jsonb normalises
-- numbers (1e16 becomes an integer, -0.0 becomes 0.0), so the jsonb column alone could not give
-- an agent back the bytes of arguments_sha256. The jsonb column stays for queries.
-- Rows stored before this migration have NULL here and are read from the jsonb value.
ALTER TABLE approvals ADD COLUMN arguments_jcs text;
