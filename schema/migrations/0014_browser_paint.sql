-- What the browser measured of each chunk (streamscope.chunks.paint_delay_us / render_us; 0 on other sides,
-- and when not measured):
--   paint_delay_us  from the chunk's arrival to the frame that showed it (the animation frame after the render)
--   render_us       main-thread time the app spent rendering it
-- Zeros on the client and server rows compress to nothing.
ALTER TABLE chunks ADD COLUMN IF NOT EXISTS paint_delay_us UInt32 CODEC(T64, ZSTD(1)) AFTER wire_bytes;
ALTER TABLE chunks ADD COLUMN IF NOT EXISTS render_us UInt32 CODEC(T64, ZSTD(1)) AFTER paint_delay_us;
