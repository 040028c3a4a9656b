(* tests/gc/gcwork.ml — allocation-heavy multi-domain program for the GC
   insight test (tests/gc/run.py). Each domain builds and drops short-lived
   lists (minor collections) and keeps a sliding window of live data alive
   (promotion and major slices). At the end it prints the runtime's own
   counters, which are global in OCaml 5 (one minor collection is a
   stop-the-world event in which every running domain takes part):
     minor_collections N
     major_collections N
     domains D *)

let work seed n =
  let keep = Array.make 512 [] in
  let acc = ref seed in
  for i = 1 to n do
    let l = List.init 64 (fun j -> (i * j) + !acc) in
    acc := (!acc + List.fold_left ( + ) 0 l) land 0xffff;
    keep.(i land 511) <- l
  done;
  !acc

let () =
  let domains = try int_of_string Sys.argv.(1) with _ -> 3 in
  let n = try int_of_string Sys.argv.(2) with _ -> 400_000 in
  let ds = List.init (domains - 1) (fun k -> Domain.spawn (fun () -> work k n)) in
  let r = work 7 n in
  let total = List.fold_left (fun a d -> a + Domain.join d) r ds in
  let s = Gc.quick_stat () in
  Printf.printf "checksum %d\nminor_collections %d\nmajor_collections %d\ndomains %d\n%!"
    total s.Gc.minor_collections s.Gc.major_collections domains
