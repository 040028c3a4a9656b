(* bench/alloc_heavy.ml — an allocation-heavy program for `make bench-alloc`:
   builds and drops string-keyed maps and lists (small blocks, most dying
   young, some promoted). Run: alloc_heavy.exe OUT.flm none|cpu|RATE [live] *)

module M = Map.Make (String)

let[@inline never] round n =
  let m = ref M.empty in
  for i = 1 to n do
    m := M.add (string_of_int (i * 7919 mod 100_003)) [ i; i + 1 ] !m
  done;
  M.fold (fun _ l acc -> List.length l + acc) !m 0

let () =
  let out = Sys.argv.(1) in
  let live = Array.length Sys.argv > 3 && Sys.argv.(3) = "live" in
  (match Sys.argv.(2) with
   | "none" -> ()
   | "cpu" -> Flamme.start ~output:out ()
   | r -> Flamme.start ~output:out ~alloc:(float_of_string r) ~live ());
  let t = ref 0 in
  for _ = 1 to 12 do
    t := !t + round 100_000
  done;
  if Flamme.is_running () then Flamme.stop ();
  Printf.printf "%d\n" !t
