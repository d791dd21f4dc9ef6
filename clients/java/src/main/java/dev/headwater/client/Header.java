package dev.headwater.client;

/** One record header; a null value is a null header value. */
public record Header(String key, byte[] value) {}
