(* demo.ml — the example profiled by `make demo`. Three domains do clearly
   different work for about 2-3 seconds so the flame graph has three
   recognizable towers:
     - domain 1: word counting with a Map and a Hashtbl   (Demo.count_words)
     - domain 2: floating-point series and a tiny n-body  (Demo.float_math)
     - main:     sorting lists of integers                 (Demo.sort_lists)
   Everything is deterministic (fixed seeds); the program prints one result
   line per task. *)

(* A small linear congruential generator: deterministic on every platform. *)
let lcg s = (s * 1103515245 + 12345) land 0x3fffffff

module SMap = Map.Make (String)

let[@inline never] make_word s = Printf.sprintf "w%d" (s mod 5000)

(* Counts pseudo-random words both in an immutable Map and in a Hashtbl and
   returns the number of distinct words and the largest count. *)
let[@inline never] count_words rounds =
  let seed = ref 1 and distinct = ref 0 and best = ref 0 in
  for _ = 1 to rounds do
    let tbl = Hashtbl.create 1024 in
    let m = ref SMap.empty in
    for _ = 1 to 40_000 do
      seed := lcg !seed;
      let w = make_word (!seed lsr 7) in
      Hashtbl.replace tbl w (1 + Option.value ~default:0 (Hashtbl.find_opt tbl w));
      m := SMap.update w (function None -> Some 1 | Some c -> Some (c + 1)) !m
    done;
    distinct := SMap.cardinal !m;
    Hashtbl.iter (fun _ c -> if c > !best then best := c) tbl
  done;
  (!distinct, !best)

(* Sums a slowly converging series and advances a 3-body system with a
   fixed step. *)
let[@inline never] float_math steps =
  let pi_est = ref 0.0 in
  for k = 0 to steps - 1 do
    let k = float_of_int k in
    let sign = if int_of_float k land 1 = 0 then 4.0 else -4.0 in
    pi_est := !pi_est +. sign /. (2.0 *. k +. 1.0)
  done;
  let px = [| 0.0; 1.0; -1.0 |] and py = [| 0.0; 0.0; 0.5 |] in
  let vx = [| 0.0; 0.0; 0.3 |] and vy = [| 0.0; 1.0; -0.4 |] in
  let m = [| 10.0; 0.1; 0.1 |] in
  for _ = 1 to steps / 20 do
    for i = 0 to 2 do
      for j = 0 to 2 do
        if i <> j then begin
          let dx = px.(j) -. px.(i) and dy = py.(j) -. py.(i) in
          let d2 = (dx *. dx) +. (dy *. dy) +. 0.01 in
          let f = m.(j) /. (d2 *. sqrt d2) in
          vx.(i) <- vx.(i) +. (1e-4 *. f *. dx);
          vy.(i) <- vy.(i) +. (1e-4 *. f *. dy)
        end
      done
    done;
    for i = 0 to 2 do
      px.(i) <- px.(i) +. (1e-4 *. vx.(i));
      py.(i) <- py.(i) +. (1e-4 *. vy.(i))
    done
  done;
  (!pi_est, px.(1))

(* Builds and sorts pseudo-random lists; returns a checksum of the minima. *)
let[@inline never] sort_lists rounds =
  let seed = ref 42 and check = ref 0 in
  for _ = 1 to rounds do
    let l = List.init 50_000 (fun _ -> seed := lcg !seed; !seed) in
    let sorted = List.sort compare l in
    check := (!check + List.hd sorted) land 0xffffff
  done;
  !check

let () =
  (* Bigger minor heaps: with three allocating domains on a small machine the
     default 256k words make stop-the-world minor collections dominate. *)
  Gc.set { (Gc.get ()) with Gc.minor_heap_size = 2 * 1024 * 1024 };
  let words = Domain.spawn (fun () -> count_words 20) in
  let floats = Domain.spawn (fun () -> float_math 60_000_000) in
  let check = sort_lists 70 in
  let distinct, best = Domain.join words in
  let pi_est, x1 = Domain.join floats in
  Printf.printf "words: %d distinct, most frequent seen %d times\n" distinct best;
  Printf.printf "floats: pi ~ %.6f, body 1 at x = %.4f\n" pi_est x1;
  Printf.printf "lists: checksum %d\n" check
